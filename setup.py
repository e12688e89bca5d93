"""The build of the distribution; its metadata is pyproject.toml's. One step is added: the
protobuf code of ``shared/pb/`` is generated into the wheel's tree (``protos/generate.py``)
when the tree being built does not have it, as a clean clone or the sdist does not."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from setuptools import setup  # type: ignore[import-untyped]
from setuptools.command.build_py import build_py  # type: ignore[import-untyped]

HERE = Path(__file__).resolve().parent


class BuildPyWithProtos(build_py):  # type: ignore[misc]
    """``build_py``, then ``shared/pb/``'s generated modules written into the build."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:  # make setup generates them in the repository itself
            return
        spec = importlib.util.spec_from_file_location("generate", HERE / "protos/generate.py")
        assert spec is not None and spec.loader is not None
        generate = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(generate)
        generate.generate(Path(self.build_lib) / "replywire")


setup(cmdclass={"build_py": BuildPyWithProtos})
