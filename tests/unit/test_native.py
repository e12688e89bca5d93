"""The build that runs is the one selected: the mypyc-compiled hot modules when a C compiler
and Python's headers are here and the build is fresh, never with ``REPLYWIRE_PURE=1``; under
CI a compiler without a compiled build fails. (``make test`` runs this file on both builds.)"""

from __future__ import annotations

import os

import pytest

from replywire import native
from replywire.native import HOT_MODULES, PURE_ENV, Selection, package_path, running, selected
from replywire.native.build import fresh, missing_toolchain
from replywire.native.build import main as build_main
from replywire.shared import consumer_core

FORCED_PURE = os.environ.get(PURE_ENV) == "1"


@pytest.mark.skipif(not FORCED_PURE, reason=f"for the pure build ({PURE_ENV}=1)")
def test_the_pure_build_imports_no_compiled_module() -> None:
    assert consumer_core.__file__.endswith(".py")
    assert running().compiled == ()
    assert running().build == "pure"
    assert selected() == Selection(compiled=False, why=f"{PURE_ENV}=1")


@pytest.mark.skipif(FORCED_PURE, reason=f"{PURE_ENV}=1 forces the pure build")
def test_with_a_compiler_the_compiled_modules_are_imported() -> None:
    lacking = missing_toolchain()
    if lacking is not None:
        pytest.skip(f"{lacking}: only the pure build can run here")
    if not fresh():
        message = "a C compiler is here but the compiled build is missing or stale (make setup)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    assert consumer_core.__file__.endswith(native.EXTENSION_SUFFIX)
    assert running().compiled == HOT_MODULES
    assert running().build == "compiled"
    assert running().describe().startswith("compiled (mypyc: shared.digest, ")


def test_the_pure_build_leaves_a_package_path_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PURE_ENV, "1")
    selected.cache_clear()
    try:
        assert package_path(["/src/shared"], "shared") == ["/src/shared"]
    finally:
        selected.cache_clear()


def test_the_compiled_build_comes_first_in_a_package_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native, "selected", lambda: Selection(compiled=True, why=""))
    assert package_path(["/src/shared/wire"], "replywire.shared.wire") == [
        str(native.BUILD_DIR / "replywire" / "shared" / "wire"),
        "/src/shared/wire",
    ]


def test_a_manifest_names_every_hot_module_by_its_source() -> None:
    manifest = native.manifest_for(native.sources_digest())
    assert manifest["extension_suffix"] == native.EXTENSION_SUFFIX
    digests = manifest["modules"]
    assert isinstance(digests, dict)
    assert sorted(digests) == sorted(HOT_MODULES)
    assert all(len(value) == 64 for value in digests.values())


def test_the_version_line_says_which_build() -> None:
    line = native.version_line()
    assert line.startswith("replywire ")
    assert f", {running().build} " in line or line.endswith(f", {running().build}")


def test_the_check_fails_only_where_a_compiler_has_no_fresh_build() -> None:
    expected = 1 if missing_toolchain() is None and not fresh() else 0
    assert build_main(["--check"]) == expected


def test_setup_compiles_nothing_when_the_pure_build_is_forced(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(PURE_ENV, "1")
    manifest = native.MANIFEST.read_bytes() if native.MANIFEST.exists() else None
    assert build_main([]) == 0
    assert "the hot modules are not compiled" in capsys.readouterr().err
    assert (native.MANIFEST.read_bytes() if native.MANIFEST.exists() else None) == manifest
