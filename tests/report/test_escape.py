"""Generated pages (results pages, ``report.md``, ``report.html``, tables) show text from a run
folder as inert text: a ``<script>``, a fence break, a forged heading or table row in a row's
fields, ``env.json`` or ``run.json`` lands escaped (posbench/report/escape.py; issue 44)."""

from __future__ import annotations

import json
import re

from posbench.report import results_page
from posbench.report.build import build_report
from posbench.report.escape import md_code, md_fence, md_text
from posbench.tasks import find as find_task
from tests.helpers.result_runs import CPU_ENV, write_run

EVIL_METHOD = "ali|bi<script>alert(1)</script>\n| forged | row |\n# Forged method heading"
EVIL_ENV = {**CPU_ENV, "cpu": "CPU<script>x</script>\n# Forged heading", "torch": "2.0\n```\n# Forged in fence\n```"}
EVIL_COMMAND = "python bench.py\n```\n# Forged after fence"


def hostile_run(tmp_path):
    run = write_run(tmp_path, "r1", EVIL_ENV, command=EVIL_COMMAND)
    rows = [json.loads(line) for line in (run / "cases.jsonl").read_text().splitlines()]
    for row in rows:
        if row["method"] == "alibi":
            row["method"] = EVIL_METHOD
            row["message"] = "<img src=x onerror=alert(1)>\n## Forged message heading"
    (run / "cases.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def assert_inert_markdown(text: str) -> None:
    """No raw HTML, and outside fenced blocks no line that data began: a heading or table row
    naming "Forged"; every fence closes with its own length (data cannot end one early)."""
    assert "<script" not in text and "<img" not in text
    fence = None
    for line in text.splitlines():
        ticks = re.match(r"`{3,}", line)
        if fence is None and ticks:
            fence = ticks.group(0)
        elif fence is not None:
            fence = None if line == fence else fence
        else:
            assert not re.match(r"\s*(#+ *Forged|\| forged)", line), line
    assert fence is None, "a fence left open"


def test_results_page_escapes_every_field_from_the_run_folder(tmp_path):
    (page,) = results_page.write_pages([hostile_run(tmp_path)], tmp_path / "out", find_task=find_task)
    text = page.read_text()
    assert_inert_markdown(text)
    assert "ali\\|bi&lt;script&gt;alert(1)&lt;/script&gt; \\| forged \\| row \\|" in text
    # the recorded command stays whole, inside a fence longer than any backtick run in it
    assert "````bash\npython bench.py\n```\n# Forged after fence\n````" in text
    assert text.startswith("# efficiency on CPU (CPU&lt;script&gt;x&lt;/script&gt; # Forged heading)")


def test_results_page_rewrites_its_own_page_with_an_escaped_heading(tmp_path):
    run = hostile_run(tmp_path)
    (first,) = results_page.write_pages([run], tmp_path / "out", find_task=find_task)
    (again,) = results_page.write_pages([run], tmp_path / "out", find_task=find_task)
    assert again == first  # the escaped heading is recognised as this machine's page


def test_report_markdown_and_html_escape_rows_and_env(tmp_path):
    written = build_report([hostile_run(tmp_path)], tmp_path / "report", find_task=find_task)
    for key, path in written.items():
        if key.endswith(".md"):
            assert_inert_markdown(path.read_text())
    html = written["report.html"].read_text()
    assert "<script>" not in html and "<img src=x" not in html and "&lt;script&gt;alert(1)" in html


def test_results_page_out_that_is_a_file_is_one_line(tmp_path, capsys):
    run = write_run(tmp_path, "r1", CPU_ENV)
    (tmp_path / "afile").write_text("")
    assert results_page.main([str(run), "--out", str(tmp_path / "afile")]) == 2
    err = capsys.readouterr().err
    assert err == f"error: --out {tmp_path / 'afile'}: a file, not a folder; allowed: a folder (created when missing)\n"


def test_the_helpers_keep_text_literal():
    assert md_text("a|b\nc") == "a\\|b c"
    assert md_text("method \\ seq_len") == "method \\ seq_len"  # a backslash before a space is literal
    assert md_text("x\\") == "x\\\\"
    assert md_text("[click](javascript:x) [11, 60]") == "[click\\](javascript:x) [11, 60]"
    assert md_code("a`b") == "``a`b``" and md_code("`x") == "`` `x ``"
    assert md_fence("```\nrm", "bash") == "````bash\n```\nrm\n````"
