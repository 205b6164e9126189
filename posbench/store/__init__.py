"""The run folder: its rows, run.json, env.json and a launched sweep's state, written and read here alone."""
