"""The precision task's declaration: what its tables print."""

from posbench.report.numbers import number
from posbench.tasks.precision.task import METRICS


def test_the_bias_dtypes_perplexity_cost_prints_its_digits_not_a_table_of_zeros():
    # measured on a CPU (a0b8e49, the cpu profile): differences of 7.2e-4, -2.4e-4 and 2.1e-4
    for key in ("ppl_diff@*", "ppl_diff_at_max_len"):
        fmt = METRICS[key].fmt
        assert number(7.165e-4, fmt) == "0.0007165"
        assert number(-2.436e-4, fmt) == "-0.0002436"
        assert number(1.25, fmt) == "1.25"
