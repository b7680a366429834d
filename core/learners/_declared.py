"""Declared hyper-parameters (the first half of the learner contract, docs/architecture.md
§3): a learner lists its hyper-parameters as annotated class attributes with defaults and gets
a keyword-only ``__init__`` that stores them verbatim, ``get_params`` / ``set_params`` /
``repr``, and :meth:`DeclaredParameters.validate_params` against its
``_parameter_constraints`` (:mod:`core.learners._params`).  Kept apart from
:class:`core.learners._base.OnlineLearner`, which inherits it, because nothing here knows
about learning or state."""

from __future__ import annotations

import inspect
from typing import Any, ClassVar, Self

from core.errors import InvalidParameter, unknown_names
from core.learners._params import Constraint, validate_parameters

__all__ = ["DeclaredParameters", "declared_parameters"]


def _is_parameter(name: str, annotation: Any) -> bool:
    """Whether a class annotation declares a hyper-parameter: a public name that is not a
    learned attribute (``coef_``) nor a ``ClassVar`` (the annotations are strings under
    ``from __future__ import annotations``)."""
    if name.startswith("_") or name.endswith("_"):
        return False
    text = annotation if isinstance(annotation, str) else repr(annotation)
    return not text.startswith(("ClassVar", "typing.ClassVar"))


def declared_parameters(cls: type) -> dict[str, inspect.Parameter]:
    """The hyper-parameters of ``cls`` as keyword-only parameters, in their listed order: the
    class's own declarations first, then its bases' (nearest first), so the shared ones close
    the list; each default is the class attribute as ``cls`` resolves it (a subclass that
    assigns ``max_iter = 5`` changes the default, not the position)."""
    parameters: dict[str, inspect.Parameter] = {}
    for klass in cls.__mro__:
        for name, annotation in vars(klass).get("__annotations__", {}).items():
            if name in parameters or not _is_parameter(name, annotation):
                continue
            if not hasattr(cls, name):
                raise TypeError(f"{cls.__name__}: hyper-parameter {name!r} has no default")
            default = getattr(cls, name)
            # one default object would be shared by every instance (as in dataclasses)
            if isinstance(default, list | dict | set):
                raise TypeError(
                    f"{cls.__name__}: hyper-parameter {name!r} has a mutable default; use None"
                )
            parameters[name] = inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
            )
    return parameters


def _keyword_init(cls: type, parameters: dict[str, inspect.Parameter]) -> Any:
    """The ``__init__`` of ``cls``: keyword-only, storing each declared hyper-parameter
    verbatim (its default when not given).  Its ``__signature__`` lists the parameters, which
    is what ``inspect.signature(cls.__init__)`` (and so ``sklearn.base.clone``) reads."""

    def __init__(self: Any, **params: Any) -> None:
        unknown = [name for name in params if name not in parameters]
        if unknown:
            raise TypeError(
                f"{cls.__name__}.__init__() got an unexpected keyword argument {unknown[0]!r}"
            )
        for name, parameter in parameters.items():
            setattr(self, name, params.get(name, parameter.default))

    self_parameter = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    __init__.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [self_parameter, *parameters.values()], return_annotation=None
    )
    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    __init__.__module__ = cls.__module__
    __init__.__doc__ = f"Store the hyper-parameters of {cls.__name__} (see the class docstring)."
    return __init__


class DeclaredParameters:
    """Mixin: the generated ``__init__`` and the parameter methods of every learner."""

    #: the registry name (``make_learner(name)``)
    name: ClassVar[str] = ""
    #: the names of the declared hyper-parameters, in order (set for each class)
    _parameters: ClassVar[tuple[str, ...]] = ()
    #: accepted values of every hyper-parameter; subclasses extend this dict
    _parameter_constraints: ClassVar[dict[str, list[Constraint]]] = {}

    # ------------------------------------------------------------------ parameters
    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__init__" in vars(cls):
            raise TypeError(
                f"{cls.__name__} defines __init__: declare its hyper-parameters as annotated "
                "class attributes instead (the __init__ is generated)"
            )
        parameters = declared_parameters(cls)
        cls._parameters = tuple(parameters)
        cls.__init__ = _keyword_init(cls, parameters)  # type: ignore[method-assign]

    def __init__(self, **params: Any) -> None:
        # replaced in every subclass by the generated keyword-only __init__ (the same logic,
        # with the subclass's signature); this one is what type checkers see
        _keyword_init(type(self), declared_parameters(type(self)))(self, **params)

    @classmethod
    def _param_names(cls) -> list[str]:
        return list(cls._parameters)

    @classmethod
    def param_defaults(cls) -> dict[str, Any]:
        """``{name: default}`` of every declared hyper-parameter, in order."""
        return {name: getattr(cls, name) for name in cls._parameters}

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Hyper-parameters as passed to ``__init__`` (JSON-able)."""
        return {name: getattr(self, name) for name in self._param_names()}

    @classmethod
    def check_param_names(cls, names) -> None:
        """Raise :class:`~core.errors.InvalidParameter` naming the first unknown name."""
        where = f" for learner {cls.name!r}"
        unknown = unknown_names(names, cls._param_names(), "unknown parameter(s)", where)
        if unknown is not None:
            raise InvalidParameter(unknown[1], param=unknown[0])

    def set_params(self, **params) -> Self:
        self.check_param_names(params)
        for key, value in params.items():
            setattr(self, key, value)
        return self

    def __repr__(self) -> str:
        defaults = self.param_defaults()
        changed = [f"{k}={v!r}" for k, v in self.get_params().items() if defaults.get(k) != v]
        return f"{type(self).__name__}({', '.join(changed)})"

    def validate_params(self) -> None:
        """Check every hyper-parameter now against ``_parameter_constraints``, then the
        learner's cross-parameter checks; raises :class:`~core.errors.InvalidParameter`
        (a ValueError) naming the first bad one."""
        validate_parameters(
            self._parameter_constraints,
            {name: getattr(self, name) for name in self._parameter_constraints},
        )
        self._check_params()

    def _check_params(self) -> None:
        """Checks that involve more than one parameter (none by default)."""
        return None
