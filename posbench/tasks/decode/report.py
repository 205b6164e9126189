"""The decode task's report: the generic metric tables and charts of its ``METRICS``, a table per
batch B; no section of its own."""

REPORT_ORDER = 40  # after kernels
REPORT_COLUMN = "context"  # the tables' columns: the context length C
