"""The context-extension regimes (the grid's ``recipe`` axis; methods/recipes.py holds the methods'
recipes, another thing): which apply to which method, and the model each one makes of a model
trained at L_train for L_target (s = L_target / L_train, static). Details: docs/tasks/extension.md.
"""

from __future__ import annotations

import types
from dataclasses import replace

# Names only (no torch): the suite's grid is validated against them.
ROTARY_RECIPES = ("none", "pi", "ntk", "yarn", "longrope", "llama3", "drope")
ALIBI_RECIPES = ("extrapolate", "interpolate")
RECIPES = ROTARY_RECIPES + ALIBI_RECIPES
BIAS_DTYPES = ("float32", "compute")
# recipe -> the method whose scaling it fine-tunes and evaluates with (methods/rotary*.py)
SCALED_METHOD = {
    "pi": "rotary_pi",
    "ntk": "rotary_ntk",
    "yarn": "rotary_yarn",
    "longrope": "rotary_longrope",
    "llama3": "rotary_llama3",
}
FAMILY_RECIPES = {"rotary": ROTARY_RECIPES, "alibi": ALIBI_RECIPES}
PLAIN = {"rotary": "none", "alibi": "extrapolate"}  # each method's recipe that changes nothing
FAMILY_METHOD = {"rope": "rotary", "alibi": "alibi"}  # posbench.hf.checkpoint.FAMILIES -> the recipes' method


def checkpoint_misfit(method: str, recipe: str, pretrained: str | None) -> str | None:
    """Why recipe ``recipe`` of ``method`` cannot apply to checkpoint ``pretrained`` (``hf:DIR``;
    its family read from config.json alone, no torch), or None: the run's ``unavailable`` row and
    the dry run's line say the same."""
    if not pretrained:
        return None
    from posbench.hf.checkpoint import FAMILIES, folder_of, model_type_of

    model_type = model_type_of(folder_of(pretrained))
    family = FAMILIES[model_type]
    own = FAMILY_METHOD[family]
    if method == own:
        return None
    return (
        f"recipe {recipe} ({method}) does not apply to a {model_type} checkpoint ({family} positions); "
        f"its recipes: {own} {', '.join(FAMILY_RECIPES[own])}"
    )


def unavailable(method: str, recipe: str, bias_dtype: str) -> str | None:
    """Why ``recipe`` (with ``bias_dtype``) does not apply to a model of ``method``, or None."""
    own = FAMILY_RECIPES.get(method)
    if own is None:
        return (
            f"extension: the recipes apply to rotary and alibi models, not {method}; allowed methods: {', '.join(FAMILY_RECIPES)}"
        )
    if recipe not in own:
        other = next(m for m, names in FAMILY_RECIPES.items() if recipe in names)
        return f"recipe {recipe} is for {other} models; {method}'s recipes: {', '.join(own)}"
    if bias_dtype != "float32" and method != "alibi":
        return f"bias_dtype {bias_dtype}: {method} adds no bias (the bias dtype is an axis of alibi's recipes)"
    return None


def recipe_config(base_cfg, recipe: str, L_train: int, L_target: int, bias_dtype: str = "float32"):
    """The ``ModelConfig`` the recipe fine-tunes and evaluates: the base model's with the recipe's
    method and options (scaled rotary: static factor s and ``train_len`` L_train; drope: nope)."""
    options = dict(base_cfg.method_options)
    if recipe in SCALED_METHOD:
        keep = {k: v for k, v in options.items() if k == "base"}  # the base frequency carries over
        return replace(
            base_cfg, method=SCALED_METHOD[recipe], method_options={**keep, "factor": L_target / L_train, "train_len": L_train}
        )
    if recipe == "drope":
        return replace(base_cfg, method="nope", method_options={})
    if base_cfg.method == "alibi":
        options["bias_dtype"] = bias_dtype
    return replace(base_cfg, method_options=options)


def recipe_model(base, recipe: str, L_train: int, L_target: int, bias_dtype: str = "float32"):
    """A new model for ``recipe`` holding the weights of ``base`` (a trained ``TransformerLM``):
    only the position method's own buffers may differ (a scaled row's ``trained_len``, rotary's
    frequencies that nope lacks). Scaled rotary keeps its scaling while fine-tuning (``hold_eval``);
    ``interpolate`` scales every position by L_train / L_target (``scale_positions``)."""
    from posbench.core.model import build_model

    model = build_model(recipe_config(base.cfg, recipe, L_train, L_target, bias_dtype))
    missing, unexpected = model.load_state_dict(base.state_dict(), strict=False)
    stray = [k for k in missing + unexpected if not k.startswith("method.")]
    if stray:
        raise RuntimeError(f"extension: recipe {recipe}'s model does not fit the trained weights: {', '.join(stray)}")
    model.to(next(base.parameters()).device)
    if recipe in SCALED_METHOD:
        hold_eval(model.method)
    if recipe == "interpolate":
        scale_positions(model, L_train / L_target)
    return model


def hold_eval(method) -> None:
    """Keep ``method`` in evaluation mode whatever ``model.train()`` says: a scaled rotary row
    scales in evaluation mode only (methods/rotary.py), and PI, YaRN and the others fine-tune with
    the scaled frequencies they are evaluated with."""
    method.eval()
    method.train = types.MethodType(lambda self, mode=True: self, method)


def scale_positions(model, scale: float) -> None:
    """Feed ``model`` positions p * ``scale`` (float) wherever it makes its own (training, evaluation,
    the KV cache's decoding): SambaNova's ALiBi interpolation, fixed at L_train / L_target."""
    import torch

    plain = model.positions

    def positions(start: int, length: int, device) -> torch.Tensor:
        return plain(start, length, device).to(torch.float32) * scale  # (length,)

    model.positions = positions
