"""Names of methods that several test folders check as a group."""

# The methods added by issue 16 (each with its own tests in tests/methods/test_new_methods.py);
# the default, cpu and gpu profiles of the shipped suites leave them out.
NEW = ["learned", "kerple_log", "xpos", "p_rope", "rope_nope_hybrid", "fire", "randomized"]
