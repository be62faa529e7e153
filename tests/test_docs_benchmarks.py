"""The docs' Benchmarks page: every committed result in benchmarks/results/ renders with its machine and date, the
files the scripts write (benchmarks/record.py) read back, and a malformed file stops the build naming it."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


record = _load("bench_record", ROOT / "benchmarks" / "record.py")


def _result(tmp_path: Path, name: str = "demo") -> Path:
    rows = [{"variant": "HF fp32", "ms": 12.345, "x HF fp32": 1.0, "max diff": 0.0},
            {"variant": "bertkit fp32", "ms": 4.5, "x HF fp32": 2.7433, "max diff": 3.1e-06}]
    path = tmp_path / f"{name}.json"
    record.write_result(path, name, [record.table("A table", rows, notes=["a note"])], title="Demo run",
                        data={"inference": rows}, argv=["benchmarks/demo.py", "--json", str(path)])
    return path


@pytest.mark.parametrize("path", sorted(RESULTS.glob("*.json")), ids=lambda p: p.name)
def test_every_committed_result_renders_with_machine_and_date(path):
    result = record.load_result(path)
    assert result["benchmark"] == path.stem, "a committed result's file is named after its benchmark"
    text = record.render_result(result)
    header = result["header"]
    assert header["machine"]["cpu"] in text and header["date"][:10] in text
    assert header["command"] in text and (header["commit"] or "unknown") in text
    for t in result["tables"]:
        assert t["title"] in text
        assert len(t["rows"]) > 0
        assert record.markdown(t["rows"], t["columns"]) in text


def test_the_page_has_every_result_and_how_to_reproduce():
    paths = sorted(RESULTS.glob("*.json"))
    assert paths, "benchmarks/results/ holds the committed results the page shows"
    page = record.render_page(RESULTS)
    assert page.startswith("# Benchmarks\n")
    for path in paths:
        result = record.load_result(path)
        assert f"## {result['title']}\n" in page
        assert result["header"]["command"] in page.split("## Reproduce")[1]


def test_a_written_result_reads_back_with_its_header(tmp_path):
    result = record.load_result(_result(tmp_path))
    header = result["header"]
    assert set(header) >= {"machine", "date", "finished", "commit", "command", "load"}
    assert set(header["machine"]) >= {"cpu", "flags", "cores", "threads", "ram_gb", "torch", "device"}
    assert header["date"].endswith("Z") and header["date"] <= header["finished"]
    assert header["command"].startswith("python benchmarks/demo.py --json ")
    assert result["inference"][1]["x HF fp32"] == 2.7433  # the script's own keys stay beside the header
    text = record.render_result(result)
    assert "| bertkit fp32 | 4.50 | 2.74 | 3.10e-06 |" in text  # cells as the scripts print them
    assert "| HF fp32 | 12.35 | 1.00 | 0.00 |" in text and "a note" in text


def test_a_busy_run_is_marked(tmp_path):
    result = record.load_result(_result(tmp_path))
    cores = result["header"]["machine"]["cpu_count"]
    result["header"]["load"] = [cores - 0.5, cores + 0.9]  # the run's own threads
    assert "A busy machine" not in record.render_result(result)
    result["header"]["load"] = [cores - 0.5, cores + 1.5]
    assert "A busy machine" in record.render_result(result)


def test_write_result_refuses_data_that_would_hide_the_header(tmp_path):
    with pytest.raises(ValueError, match="header"):
        record.write_result(tmp_path / "x.json", "x", [], data={"header": {}})


@pytest.mark.parametrize("content, complaint", [
    ("{not json", "not a readable JSON file"),
    ("[1, 2]", "not a JSON object"),
    ('{"benchmark": "x", "tables": []}', "no 'benchmark' name or no 'header'"),
])
def test_a_malformed_result_is_named_in_the_error(tmp_path, content, complaint):
    (tmp_path / "broken.json").write_text(content)
    with pytest.raises(ValueError, match=complaint) as error:
        record.render_page(tmp_path)
    assert str(tmp_path / "broken.json") in str(error.value)


def test_a_result_without_its_date_or_tables_is_named(tmp_path):
    path = _result(tmp_path, "good")
    result = json.loads(path.read_text())
    del result["header"]["date"]
    (tmp_path / "nodate.json").write_text(json.dumps(result))
    with pytest.raises(ValueError, match=r"nodate\.json: the header lacks \['date'\]"):
        record.render_page(tmp_path)
    (tmp_path / "nodate.json").unlink()
    result = json.loads(path.read_text())
    result["tables"][0].pop("columns")
    (tmp_path / "notable.json").write_text(json.dumps(result))
    with pytest.raises(ValueError, match=r"notable\.json: table 0 needs"):
        record.render_page(tmp_path)


def test_the_hook_adds_the_page_and_stops_the_build_on_a_bad_file(tmp_path):
    pytest.importorskip("mkdocs")
    from mkdocs.config.defaults import MkDocsConfig
    from mkdocs.exceptions import PluginError
    from mkdocs.structure.files import Files

    hook = _load("docs_hook_benchmarks", ROOT / "docs" / "hooks" / "benchmarks.py")

    (tmp_path / "docs").mkdir()

    def config(root: Path) -> MkDocsConfig:
        cfg = MkDocsConfig(config_file_path=str(root / "mkdocs.yml"))
        cfg.load_dict({"site_name": "t", "docs_dir": str(tmp_path / "docs"), "site_dir": str(tmp_path / "site")})
        errors, _ = cfg.validate()
        assert not errors, errors
        cfg.plugins._current_plugin = None  # set while mkdocs runs an event; File.generated reads it
        return cfg

    files = hook.on_files(Files([]), config(ROOT))
    page = files.get_file_from_path("benchmarks/index.md")
    assert page is not None and page.content_string == record.render_page(RESULTS)

    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    _result(tmp_path / "benchmarks" / "results", "fine")
    (tmp_path / "benchmarks" / "results" / "zbad.json").write_text("{}")
    with pytest.raises(PluginError, match=r"zbad\.json"):
        hook.on_files(Files([]), config(tmp_path))
