import pytest

from earthrl.algorithms.registry import ESTIMATORS, POLICY_LOSSES, Registry
from earthrl.rewards.registry import REWARDS, TURN_REWARDS


@pytest.mark.parametrize("registry,name", [(REWARDS, "mefr"), (TURN_REWARDS, "hirs_specialist"),
                                           (ESTIMATORS, "grpo_tap"), (POLICY_LOSSES, "mixed_role")])
def test_re_registration_of_a_different_function_is_refused(registry, name):
    original = registry.lookup(name)
    with pytest.raises(ValueError, match="already registered"):
        registry.register(name)(lambda *a, **k: 0.0)
    assert registry.register(name)(original) is original  # the same function again is a no-op
    assert registry.lookup(name) is original


def test_decorator_refuses_a_taken_builtin_name():
    with pytest.raises(ValueError, match="reward 'outcome' is already registered"):
        REWARDS.register("outcome")(lambda t, task: 1.0)
    with pytest.raises(ValueError, match="executor_tiered"):
        TURN_REWARDS.register("executor_tiered")(lambda t, task: [])


def test_lookup_lists_names_and_imports_user_functions():
    reg = Registry("thing")
    reg.register("a")(len)
    with pytest.raises(KeyError, match="unknown thing 'b'; choose one of: a"):
        reg.lookup("b")
    assert reg.lookup("math:sqrt")(9.0) == 3.0
    with pytest.raises(KeyError, match="cannot be imported"):
        reg.lookup("math:nope")
    assert set(ESTIMATORS.names()) >= {"grpo", "grpo_tap", "hierarchical", "executor_node"}
