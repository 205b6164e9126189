"""The protocols several tasks share, one floor beneath the task packages: a task package
(``posbench/tasks/<task>/``) imports these modules and never another task package.

- ``training``: the settings of training on a corpus (model, corpus, budget, optimizer),
  ``open_corpus`` and the budget's metrics;
- ``seeds``: seeds as an axis (one model per seed, their results combined into one row);
- ``pretrained_eval``: a pretrained Hugging Face checkpoint evaluated instead of a trained model
  (its settings, the checkpoint under the case's method, its evaluation tokens);
- ``train_eval``: train then evaluate perplexity (its settings block, the trained model and its
  checkpoint, the evaluation cells): extrapolation runs it, precision is a variant of it;
- ``probing``: the synthetic retrieval probes, their scoring and the text-and-probe training mix;
- ``distances``: the distance buckets (1-8, 9-64, ..., beyond L_train) of the loss by distance and
  the attention diagnostics;
- ``attention_diagnostics``: the attention diagnostics feature (its run, metrics and report);
- ``generation`` and ``decode_cost``: greedy decoding with a KV cache, and its cost at a target
  length (the frontier's decode cost, measured by the decode task and by training tasks).

What goes here and what stays in a task package: docs/tasks/contract.md.
"""
