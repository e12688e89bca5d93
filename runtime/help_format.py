"""``--help`` that shows each flag's default, and nothing for a flag that has none."""

from __future__ import annotations

import argparse


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's defaults formatter, without ``(default: None)`` / ``(default: False)``:
    such a flag's help says what being unset means instead."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)
