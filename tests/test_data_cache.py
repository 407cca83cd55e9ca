"""The shipped YAML files are parsed once per change (issue 44: PyYAML's import and the parses
were 25-30 ms of every run on the lent H100 before a bench's probes could start): the cached
JSON form gives what the YAML gives, a changed file is read again, a value JSON would change
is never kept, and a cache another account could write is not read."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from omni_host.resources import data_cache, data_path, load_yaml, read_yaml


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return data_cache()


def test_a_shipped_file_reads_the_same_from_its_kept_form(cache: Path) -> None:
    path = data_path("checks") / "catalog.yaml"
    first = read_yaml(path)
    (kept,) = cache.glob("*.json")
    assert oct(kept.stat().st_mode & 0o777) == "0o600"
    assert oct(cache.stat().st_mode & 0o777) == "0o700"
    digest, _, text = kept.read_bytes().partition(b"\n")
    assert digest.decode() == hashlib.sha256(text).hexdigest()
    assert json.loads(text) == first == load_yaml(path.read_text())
    assert read_yaml(path) == first  # from the kept form now


def test_a_changed_file_is_read_again(cache: Path, tmp_path: Path) -> None:
    path = tmp_path / "defaults.yml"
    path.write_text("omni_swap_size_mib: 1024\n")
    assert read_yaml(path) == {"omni_swap_size_mib": 1024}
    path.write_text("omni_swap_size_mib: 4096\n")
    os.utime(path, ns=(1, 1))  # another modification time, as an edit gives
    assert read_yaml(path) == {"omni_swap_size_mib": 4096}
    assert len(list(cache.glob("*.json"))) == 2


def test_a_value_json_would_change_is_not_kept(cache: Path) -> None:
    """xid.yaml's keys are integers: JSON would give them back as strings."""
    path = data_path("checks") / "xid.yaml"
    value = read_yaml(path)
    assert all(isinstance(k, int) for k in value)
    assert list(cache.glob("*.json")) == []
    assert read_yaml(path) == value


def test_a_cache_others_can_write_is_not_read(cache: Path, tmp_path: Path) -> None:
    path = tmp_path / "spec.yml"
    path.write_text("a: 1\n")
    read_yaml(path)
    (kept,) = cache.glob("*.json")
    _keep(kept, '{"a": 2}')  # planted, in the form omni-host writes
    cache.chmod(0o777)
    assert read_yaml(path) == {"a": 1}
    cache.chmod(0o700)
    assert read_yaml(path) == {"a": 2}  # the same file, this user's own cache: read


def _keep(kept: Path, text: str) -> None:
    kept.write_bytes(hashlib.sha256(text.encode()).hexdigest().encode() + b"\n" + text.encode())


@pytest.mark.parametrize("entry", [b"[1, 2]", b'{"a": 2}', b"", b"\xff\xfe", b"0" * 64 + b"\n{}",
                                   b"x\n" + b"[" * 100000])
def test_an_entry_that_is_not_what_omni_host_wrote_is_parsed_again_from_its_source(
        cache: Path, tmp_path: Path, entry: bytes) -> None:
    """A wrong-shape entry (a list where the catalog's mapping belongs, an edit, a truncation)
    raised a traceback on every run (issue 61): it is parsed again, and the command runs."""
    path = data_path("checks") / "catalog.yaml"
    first = read_yaml(path)
    (kept,) = cache.glob("*.json")
    kept.write_bytes(entry)
    assert read_yaml(path) == first


def test_a_deep_entry_with_a_right_digest_is_refused_by_the_bounded_reader(
        cache: Path, tmp_path: Path) -> None:
    path = tmp_path / "spec.yml"
    path.write_text("a: 1\n")
    read_yaml(path)
    (kept,) = cache.glob("*.json")
    _keep(kept, "[" * 100000 + "]" * 100000)
    assert read_yaml(path) == {"a": 1}
