"""The documented command ``python -m producer.convert_capture RUN_DIR OUT_DIR``.

The converter itself is ``producer.sources.gemini.convert``; this module only keeps the
README's command name.
"""

from __future__ import annotations

from replywire.producer.sources.gemini.convert import main

if __name__ == "__main__":
    raise SystemExit(main())
