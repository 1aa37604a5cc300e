"""The one Registry class (envs/registry.py) every name → thing table of EarthRL uses."""

import sys

import pytest

from earthrl.envs.registry import Registry, import_target


def test_lazy_import_of_named_builtin_modules(tmp_path, monkeypatch):
    (tmp_path / "earthrl_test_tables.py").write_text(
        "from earthrl.envs.registry import Registry\nREG = Registry('gadget', ['earthrl_test_gadgets'])\n")
    (tmp_path / "earthrl_test_gadgets.py").write_text(
        "from earthrl_test_tables import REG\nREG.register('g1', 'one')\n@REG.register('g2')\ndef g2():\n    return 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from earthrl_test_tables import REG

    assert "earthrl_test_gadgets" not in sys.modules
    assert REG.lookup("g2")() == 2 and REG["g1"] == "one"
    assert "earthrl_test_gadgets" in sys.modules and REG.names() == ["g1", "g2"]
    monkeypatch.delitem(sys.modules, "earthrl_test_gadgets")
    monkeypatch.delitem(sys.modules, "earthrl_test_tables")


def test_refuses_a_different_object_but_accepts_the_same_or_replace():
    reg = Registry("widget")
    reg.register("w", ("a", 1))
    assert reg.register("w", ("a", 1)) == ("a", 1)  # equal record again: no-op
    with pytest.raises(ValueError, match="widget 'w' is already registered by builtins.tuple"):
        reg.register("w", ("b", 2))
    assert reg.register("w", ("b", 2), replace=True) == ("b", 2) and reg["w"] == ("b", 2)


def test_unknown_names_list_the_choices_in_the_error_class_asked():
    reg = Registry("engine")
    reg.register("hf", object())
    with pytest.raises(KeyError, match="unknown engine 'vllm'; choose one of: hf, or give module:function"):
        reg.lookup("vllm")
    with pytest.raises(ValueError, match="unknown engine 'x'; choose one of: hf$"):
        reg.lookup("x", imports=False, error=ValueError)
    assert reg.lookup("math:floor")(2.7) == 2 and import_target("math:pi") > 3.14
