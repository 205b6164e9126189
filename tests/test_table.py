"""The comparison table: methods x lengths per metric, ratios to the baseline from the same rows."""
import pandas as pd
import pytest

from posbench import table


def row(method, seq_len, status="ok", train=None, eval_=None, mem=None):
    metrics = {"train_wps": train, "eval_wps": eval_, "peak_mem_train_bytes": mem} if status == "ok" else {}
    return {"method": method, "params": {"seq_len": seq_len}, "status": status, "metrics": metrics}


ROWS = [
    row("sinusoidal", 512, train=26_000.0, eval_=77_800.0, mem=19.2e9),
    row("alibi", 512, train=25_800.0, eval_=76_400.0, mem=19.3e9),
    row("t5_bias", 512, status="oom"),
    row("sinusoidal", 1024, train=20_000.0, eval_=60_000.0, mem=25e9),
    row("alibi", 1024, train=21_000.0, eval_=30_000.0, mem=25e9),
    row("t5_bias", 1024, status="unavailable"),
]
METRICS = ["train_wps", "eval_wps", "peak_mem_train_bytes"]


def test_layout_rows_columns_and_cells():
    t = table.build(ROWS, METRICS, "sinusoidal", ["sinusoidal", "t5_bias", "alibi"])
    assert list(t.index) == ["sinusoidal", "t5_bias", "alibi"]
    assert list(t.columns) == [(title, f"L={L}") for title in ("Train words/s", "Eval words/s", "Train memory")
                               for L in (512, 1024)]
    assert t.loc["alibi", ("Train words/s", "L=512")] == "25.8k (0.99x)"
    assert t.loc["sinusoidal", ("Eval words/s", "L=512")] == "77.8k (1.00x)"
    assert t.loc["alibi", ("Train memory", "L=512")] == "19.3 GB (1.01x)"
    assert t.loc["t5_bias", ("Train words/s", "L=512")] == "oom"
    assert t.loc["t5_bias", ("Eval words/s", "L=1024")] == "unavailable"


def test_ratios_are_computed_from_the_rows():
    r = table.ratios(ROWS, "eval_wps", "sinusoidal")
    assert r.loc["alibi", 512] == pytest.approx(76_400 / 77_800)
    assert r.loc["alibi", 1024] == pytest.approx(0.5)
    assert r.loc["sinusoidal"].tolist() == [1.0, 1.0]
    assert pd.isna(r.loc["t5_bias", 512])


def test_no_ratio_when_the_baseline_failed():
    rows = [row("sinusoidal", 64, status="error"), row("alibi", 64, train=1000.0, eval_=1.0, mem=1e6)]
    t = table.build(rows, ["train_wps"], "sinusoidal")
    assert t.loc["alibi", ("Train words/s", "L=64")] == "1.0k" and t.loc["sinusoidal"].tolist() == ["error"]


def test_formats():
    assert table.fmt("train_wps", 25_812.0) == "25.8k" and table.fmt("eval_wps", 1_234_567) == "1.23M"
    assert table.fmt("peak_mem_train_bytes", 526e6) == "526 MB" and table.fmt("x", None) == "n/a"


def test_markdown_and_csv_files(tmp_path):
    t = table.build(ROWS, METRICS, "sinusoidal")
    table.write(t, tmp_path, note="note line")
    md = (tmp_path / "table.md").read_text().splitlines()
    assert md[0] == "note line"
    assert md[2] == ("| method | Train words/s L=512 | Train words/s L=1024 | Eval words/s L=512 | "
                     "Eval words/s L=1024 | Train memory L=512 | Train memory L=1024 |")
    assert md[6].startswith("| t5_bias | oom | unavailable |")
    csv = pd.read_csv(tmp_path / "table.csv", index_col=0)
    assert csv.loc["alibi", "Train words/s L=512"] == "25.8k (0.99x)"


def test_ok_case_without_the_metric_says_not_applicable():
    rows = ROWS + [row("nope", 512, train=25_000.0, eval_=None, mem=19.0e9)]
    t = table.build(rows, METRICS, "sinusoidal", ["sinusoidal", "t5_bias", "alibi", "nope"])
    assert t.loc["nope", ("Eval words/s", "L=512")] == "n/a"
    assert t.loc["nope", ("Train words/s", "L=512")] == "25.0k (0.96x)"
