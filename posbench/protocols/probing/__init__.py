"""Synthetic retrieval probes and their scoring, shared by the retrieval task (which measures
them) and the extension task (whose base model trains on the passkey mix):

- ``tokens``: the probes' token ids (``ProbeVocab``) and a batch of examples (``ProbeBatch``);
- ``probes``: the four probes (passkey, mqar, copy, reverse) and the front over every probe;
- ``ruler``: RULER's probes (multikey, vartrack, common_words, frequent_words; aggregate);
- ``scoring``: a model's answers on a batch scored exactly or by RULER's string_match_all /
  string_match_part, by depth and distance (``eval_length``);
- ``training_mix``: batches of text mixed with probe examples, and the model trained on them
  (``train_probe_model``).
"""
