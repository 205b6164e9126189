"""Rotary's scaled variants: one literal table in methods/rotary.py, one class building each
row, names the registry reads from the file without importing torch (``register_variants``)."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from posbench.core import registry
from posbench.core.method import ModelConfig

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = {
    "rotary_pi": ("pi", None),
    "rotary_ntk": ("ntk", 8.0),
    "rotary_dynamic_ntk": ("dynamic_ntk", None),
    "rotary_yarn": ("yarn", None),
}


@pytest.fixture
def clean_registry():
    before = set(registry.registered())
    yield
    for name in set(registry.registered()) - before:
        registry.unregister(name)


@pytest.mark.subprocess
def test_listing_reads_the_rotary_table_without_importing_torch():
    code = (
        "import sys; from posbench.core import registry; found = registry.listing(); "
        "print(sorted(n for n in found if n.startswith('rotary')), 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.split("] ")[1].strip() == "False"
    # the table's rows, and the two scalings that subclass rotary in files of their own
    assert eval(out.split("] ")[0] + "]") == sorted(["rotary", *VARIANTS, "rotary_llama3", "rotary_longrope"])


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_each_variant_is_rotary_with_its_scaling_fixed(name):
    scaling, factor = VARIANTS[name]
    cls = registry.get(name)
    assert cls.name == name and issubclass(cls, registry.get("rotary"))
    assert registry.origin(name) == str(ROOT / "methods" / "rotary.py")
    m = registry.build(ModelConfig(method=name, method_options={"train_len": 64}))
    assert (m.scaling, m.factor, m.train_len, m.base) == (scaling, factor, 64, 10000.0)
    with pytest.raises(
        registry.RegistryError,
        match=rf"^method '{name}': unknown option\(s\) scaling; "
        r"allowed: factor, train_len, base$",
    ):
        registry.build(ModelConfig(method=name, method_options={"scaling": "pi"}))


def test_a_variant_equals_rotary_with_the_same_options():
    cfg = dict(d_model=64, n_heads=4)
    variant = registry.build(ModelConfig(method="rotary_ntk", **cfg)).eval()
    plain = registry.build(ModelConfig(method="rotary", method_options={"scaling": "ntk", "factor": 8.0}, **cfg)).eval()
    q, k, v = (torch.randn(1, 4, 40, 16, generator=torch.Generator().manual_seed(i)) for i in range(3))
    pos = torch.arange(40)
    assert torch.equal(variant.attend(q, k, v, pos, pos, 0), plain.attend(q, k, v, pos, pos, 0))


PLUGIN = textwrap.dedent("""
    from posbench.core.method import PositionMethod
    from posbench.core.registry import register_variants

    TABLE = {TABLE}


    def make(name, options):
        return type("V", (PositionMethod,), {{"name": name, "size": options["size"]}})


    register_variants(TABLE, make)
""")


def test_a_plugin_table_is_read_without_importing_the_file(tmp_path, monkeypatch, clean_registry):
    path = tmp_path / "fam.py"
    path.write_text(
        PLUGIN.format(TABLE='{"fam_small": {"size": 1}, "fam_big": {"size": 2}}') + "raise RuntimeError('imported')\n"
    )  # importing it would fail
    monkeypatch.setenv(registry.METHODS_ENV_PATH, str(tmp_path))
    found = registry.listing()
    assert found["fam_small"] == found["fam_big"] == str(path.resolve())
    assert not registry.is_imported(path)
    path.write_text(PLUGIN.format(TABLE='{"fam_small": {"size": 1}, "fam_big": {"size": 2}}'))
    assert registry.get("fam_big").size == 2


@pytest.mark.parametrize(
    "table", ['dict(fam_small={"size": 1})', '{"fam" + "_small": {"size": 1}}'], ids=["not-a-literal", "computed-key"]
)
def test_a_table_reading_cannot_follow_is_imported(tmp_path, monkeypatch, clean_registry, table):
    (tmp_path / "fam.py").write_text(PLUGIN.format(TABLE=table))
    monkeypatch.setenv(registry.METHODS_ENV_PATH, str(tmp_path))
    assert "fam_small" in registry.listing()
    assert registry.is_imported(tmp_path / "fam.py")


def test_a_variant_class_with_another_name_is_one_line(clean_registry):
    from posbench.core.method import PositionMethod

    def make(name, options):
        return type("V", (PositionMethod,), {"name": "other"})

    with pytest.raises(
        registry.RegistryError,
        match=r"^register_variants: make\('fam_x', \.\.\.\) made a method named "
        r"'other'; allowed: the row's name 'fam_x'$",
    ):
        registry.register_variants({"fam_x": {}}, make)
