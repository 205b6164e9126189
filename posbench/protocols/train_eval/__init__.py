"""Train then evaluate: the protocol of the tasks that train a model at L_train on a corpus (or
reload the case's checkpoint), then measure its perplexity at each L_valid. Extrapolation runs it
in full; precision is a thin variant of it (one model, evaluated with its bias in two dtypes).

- ``settings``: the settings block (``Settings``) and the metrics of a trained model
  (``TRAINED_MODEL_METRICS``), declared the same in every task that trains one;
- ``model``: where a case's model is kept (``checkpoint_path``) and the model trained or reloaded
  (``train_case_model``);
- ``evaluations``: one perplexity evaluation as a cell of ``series["evals"]`` (``eval_cell``, the
  source's bound ``source_bound``), its readers and the values ``bench.py compare`` reads.
"""
