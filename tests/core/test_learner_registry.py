"""The learner registry: a name imports its own module only, and every module registers its
learner under the module's name (the rule that lets :func:`learner_class` import one module)."""

import importlib
import subprocess
import sys

import pytest

from core.learners import LEARNERS, available_learners, learner_class, learner_modules


def test_every_learner_module_registers_its_own_name():
    for module in learner_modules():
        importlib.import_module(module)
        name = module.rpartition(".")[2]
        assert LEARNERS[name].__module__ == module
    assert available_learners() == sorted(name.rpartition(".")[2] for name in learner_modules())


def test_building_auto_imports_only_the_learner_modules_of_its_candidates():
    program = (
        "import sys\n"
        "from core.learners import make_learner\n"
        "make_learner('auto', random_state=0)\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('core.learners.')"
        " and not m.rpartition('.')[2].startswith('_'))))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True
    )
    imported = set(result.stdout.split())
    assert imported == {
        "core.learners.auto",
        "core.learners.boosted_embedded",
        "core.learners.ftrl_pauc",
        "core.learners.logistic",
    }


def test_an_unknown_name_lists_every_learner():
    with pytest.raises(ValueError, match="unknown learner 'nope'; available: .*spam"):
        learner_class("nope")
