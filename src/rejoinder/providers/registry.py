"""Chat models by name, for the command line and agent files: ``"anthropic/claude-sonnet-4-5"``
is ``anthropic.LLM(model="claude-sonnet-4-5")``; a name whose first part is no provider
(``gpt-4o-mini``, ``llama3.2``, ``meta-llama/Llama-3.1-8B``) goes to an OpenAI-compatible
server, as ``--llm`` always did.

Other packages add providers through the ``rejoinder.llms`` entry-point group: the entry's
name is the prefix, its object a callable ``(model, *, base_url, api_key) -> rj.LLM``. In a
package's ``pyproject.toml``::

    [project.entry-points."rejoinder.llms"]
    mistral = "rejoinder_mistral:make_llm"

and ``--llm mistral/mistral-large`` builds ``make_llm("mistral-large", base_url=None,
api_key=None)``. An installed package's entry named like a built-in prefix (``openai``,
``anthropic``) replaces it.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import metadata

from ..models import LLM

__all__ = ["ENTRY_POINT_GROUP", "LLMFactory", "llm_from_name", "llm_providers"]

ENTRY_POINT_GROUP = "rejoinder.llms"

LLMFactory = Callable[..., LLM]
"""``(model, *, base_url, api_key) -> LLM``."""


def _openai(model: str, *, base_url: str | None, api_key: str | None) -> LLM:
    from .openai import LLM as OpenAILLM

    return OpenAILLM(model=model, base_url=base_url, api_key=api_key)


def _anthropic(model: str, *, base_url: str | None, api_key: str | None) -> LLM:
    from .anthropic import LLM as AnthropicLLM

    return AnthropicLLM(model=model, base_url=base_url, api_key=api_key)


def _google(model: str, *, base_url: str | None, api_key: str | None) -> LLM:
    from .google import LLM as GoogleLLM

    return GoogleLLM(model=model, base_url=base_url, api_key=api_key)


_BUILT_IN: dict[str, LLMFactory] = {"openai": _openai, "anthropic": _anthropic, "google": _google}


def llm_providers() -> dict[str, LLMFactory]:
    """Every provider prefix known here: the built-in ones and the installed packages'."""
    providers = dict(_BUILT_IN)
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
        providers[entry.name] = _loader(entry)
    return providers


def _loader(entry: metadata.EntryPoint) -> LLMFactory:
    def make(model: str, *, base_url: str | None, api_key: str | None) -> LLM:
        try:
            factory = entry.load()
        except Exception as exc:
            raise ValueError(
                f"the provider {entry.name!r} ({entry.value}) could not be loaded: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        llm = factory(model, base_url=base_url, api_key=api_key)
        if not isinstance(llm, LLM):
            raise ValueError(
                f"the provider {entry.name!r} ({entry.value}) made a {type(llm).__name__}, "
                "not an rj.LLM"
            )
        return llm

    return make


def llm_from_name(name: str, *, base_url: str | None = None, api_key: str | None = None) -> LLM:
    """The chat model ``name`` stands for (see the module). ``ValueError`` for an empty
    name, a provider prefix with no model, or a provider that fails to load."""
    name = name.strip()
    if not name:
        raise ValueError("a model name is needed (e.g. gpt-4o-mini, anthropic/claude-sonnet-4-5)")
    prefix, slash, model = name.partition("/")
    factory = llm_providers().get(prefix) if slash else None
    if factory is None:
        return _openai(name, base_url=base_url, api_key=api_key)
    if not model:
        raise ValueError(f"{name!r} names the provider {prefix!r} but no model after the '/'")
    return factory(model, base_url=base_url, api_key=api_key)
