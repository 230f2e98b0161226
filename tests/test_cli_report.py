"""``hwgen report RUN.json -o report.html``: the page written and one line saying what it
holds; a bad input is one ``hwgen: error:`` line and exit status 2."""

import json
import subprocess
import sys

import pytest

from hwgen.cli import main
from tests.helpers.run_json import single_run, workload_run
from tests.test_cli_errors import one_error_line


def test_report_writes_the_page_and_says_what_it_drew(tmp_path, capsys):
    run_json = tmp_path / "run.json"
    run_json.write_text(json.dumps(workload_run()))
    out = tmp_path / "report.html"
    assert main(["report", str(run_json), "-o", str(out)]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"wrote {out} (")
    assert line.endswith("MB): 5 of 5 plots drawn")
    assert '<section id="timeline">' in out.read_text()


def test_a_single_model_run_names_the_plots_it_lacks(tmp_path, capsys):
    run_json = tmp_path / "run.json"
    run_json.write_text(json.dumps(single_run()))
    assert main(["report", str(run_json), "-o", str(tmp_path / "r.html")]) == 0
    assert capsys.readouterr().out.strip().endswith(
        "2 of 5 plots drawn; not in the run's JSON: per-kernel cycles, fused and unfused, "
        "reconfiguration timeline, per-variant resources")


@pytest.mark.parametrize(("content", "message"), [
    (None, "no file {path}; give the JSON that 'hwgen run ... --json' printed"),
    ("total_cycles: 5", "{path} is not JSON (Expecting value at line 1); give the JSON"),
    (json.dumps({"format": "hwgen-variant"}), "run.json is a 'hwgen-variant' file, not a run's "
                                              "JSON"),
    (json.dumps({"ok": True, "cycles": 5}), "run.json is neither form 'hwgen run' prints"),
])
def test_bad_inputs_are_one_line_and_status_2(tmp_path, capsys, content, message):
    path = tmp_path / "run.json"
    if content is not None:
        path.write_text(content)
    out = tmp_path / "report.html"
    assert main(["report", str(path), "-o", str(out)]) == 2
    assert message.format(path=path) in one_error_line(capsys)
    assert not out.exists()


def test_the_output_is_checked_too(tmp_path, capsys):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(workload_run()))
    assert main(["report", str(path), "-o", str(tmp_path / "no" / "r.html")]) == 2
    assert "no folder" in one_error_line(capsys)
    with pytest.raises(SystemExit) as exc:
        main(["report", str(path)])
    assert exc.value.code == 2
    assert "the following arguments are required: -o/--output" in one_error_line(capsys)


def test_the_installed_command_exits_2_with_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "hwgen.cli", "report", str(tmp_path / "x.json"),
                           "-o", str(tmp_path / "r.html")], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [f"hwgen: error: no file {tmp_path / 'x.json'}; give the "
                                        f"JSON that 'hwgen run ... --json' printed"]
