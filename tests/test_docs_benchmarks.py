"""The benchmarks table is generated from the figures in benchmarks/results/*.json and
is up to date in benchmarks/README.md and docs/benchmarks/index.md; every benchmark has
its figures, its page and a ``--record`` option that writes them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.doc_checks import ROOT, load_script

table = load_script(ROOT / "benchmarks" / "table.py", "benchmarks_table")
recorded = load_script(ROOT / "benchmarks" / "recorded.py", "benchmarks_recorded")


def test_both_tables_are_what_the_json_figures_give() -> None:
    assert table.main(["--check"]) == 0, "run python benchmarks/table.py"


def test_a_stale_table_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    page = tmp_path / "index.md"
    page.write_text(f"# B\n\n{table.START}\n| old |\n{table.END}\n", encoding="utf-8")
    monkeypatch.setattr(table, "TARGETS", {page: ""})
    assert table.main(["--check"]) == 1
    assert table.main([]) == 0 and table.main(["--check"]) == 0
    assert "[conflicts](conflicts.md)" in page.read_text(encoding="utf-8")


@pytest.mark.parametrize("name", list(table.BENCHMARKS))
def test_every_benchmark_has_figures_a_page_and_a_record_option(name: str) -> None:
    doc = table.load(name)  # raises when a required key is missing
    for key in ("headline", "machine", "load", "command"):
        assert isinstance(doc[key], str) and doc[key].strip()
    assert doc["command"].startswith(f"python benchmarks/{name}.py")
    assert (ROOT / "docs" / "benchmarks" / f"{name}.md").is_file()
    script = (ROOT / "benchmarks" / f"{name}.py").read_text(encoding="utf-8")
    assert f'with recording("{name}"):' in script


def test_the_two_stage_page_names_the_commit_of_its_figures_and_what_varies() -> None:
    """Its figures depend on the code (and MiniLM's on float arithmetic): the page says at
    which commit they were measured and what a rerun changes, not that they are fixed."""
    page = (ROOT / "docs" / "benchmarks" / "two_stage.md").read_text(encoding="utf-8")
    assert f"one run at `{table.load('two_stage')['commits']['results']}`" in page
    assert "deterministic" not in page
    assert "What repeats and what does not" in page


def test_a_json_file_without_a_figure_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(table, "RESULTS", tmp_path)
    (tmp_path / "conflicts.json").write_text(json.dumps({"benchmark": "conflicts"}))
    with pytest.raises(ValueError, match="missing"):
        table.load("conflicts")
    (tmp_path / "conflicts.json").write_text("{not json")
    with pytest.raises(json.JSONDecodeError):
        table.load("conflicts")


def test_record_writes_goals_machine_load_and_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.json"
    argv = ["benchmarks/demo.py", "--quick", f"--record={out}"]
    with pytest.raises(SystemExit), recorded.recording("demo", argv):
        sys.stdout.write("measurement  1.0 us\n")
        sys.stdout.write("  PASS: select() under 100 us\n")
        sys.stdout.write("  FAIL: something else\n")
        sys.exit(0)
    assert argv == ["benchmarks/demo.py", "--quick"]  # the script never sees the option
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert doc["goals"] == ["PASS: select() under 100 us", "FAIL: something else"]
    assert doc["headline"] == "PASS: select() under 100 us; FAIL: something else"
    assert doc["command"] == "python benchmarks/demo.py --quick"
    assert "CPUs" in doc["machine"] and doc["load"].startswith("load average")
    assert doc["output"][0] == "measurement  1.0 us"
    assert set(doc["commits"]) == {"run"}  # the checked-out commit, or None outside git
    assert "PASS: select()" in capsys.readouterr().out  # still printed as it ran


def test_without_record_nothing_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recorded, "RESULTS", tmp_path)
    argv = ["benchmarks/demo.py"]
    with recorded.recording("demo", argv):
        sys.stdout.write("PASS: x\n")
    assert list(tmp_path.iterdir()) == [] and argv == ["benchmarks/demo.py"]
