"""From run logs to results: the tidy metrics table, tables, pass checks and the paper's figures."""
