"""files.py's atomic writes under concurrency: two units in one Dask worker process (a unit that secedes while
its tasks run lets another start) write the same small file at the same moment; each write lands whole and
none fails on a temporary name the other renamed away."""

from __future__ import annotations

import threading

import pytest

from grrr_stream.files import atomic_write_text


def test_threads_of_one_process_writing_one_file_at_once_all_succeed(tmp_path):
    target = tmp_path / "zarr.json"
    start, errors = threading.Barrier(8), []

    def write(i: int) -> None:
        start.wait()
        try:
            for _ in range(50):
                atomic_write_text(target, f"writer {i}\n" * 100)
        except Exception as e:  # noqa: BLE001 - collected for the assertion
            errors.append(e)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors[:3]
    lines = set(target.read_text().splitlines())
    assert len(lines) == 1 and lines.pop().startswith("writer ")  # one writer's text, whole
    assert [p.name for p in tmp_path.iterdir()] == ["zarr.json"]  # no temporary file left behind


@pytest.mark.parametrize("where", ["missing parent", "a folder"])
def test_a_failed_write_names_the_file_asked_for_and_leaves_no_temporary(tmp_path, where):
    target = tmp_path / "missing" / "out.json" if where == "missing parent" else tmp_path / "out.json"
    if where == "a folder":
        target.mkdir()
    with pytest.raises(OSError) as e:
        atomic_write_text(target, "{}")
    assert e.value.filename == str(target) and ".tmp-" not in str(e.value)
    assert not [p for p in tmp_path.rglob("*") if ".tmp-" in p.name]
