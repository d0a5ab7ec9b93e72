"""LLM providers behind one small interface: anthropic, openai (and OpenAI-compatible servers), scripted.

The runtime needs only what is re-exported here: the values and errors of :mod:`bots.llm.base`, the profiles,
and :func:`create_provider`. The SDK adapters are imported when a profile needs them.
"""

from __future__ import annotations

from bots.llm.base import (
    ACTIONS,
    DECIDE_TOOL,
    Action,
    ChatProvider,
    Completion,
    CompletionRequest,
    Decision,
    DecisionRequest,
    DecisionResult,
    LLMAuthError,
    LLMBadOutput,
    LLMBadRequest,
    LLMError,
    LLMRateLimited,
    LLMTimeout,
    LLMUnavailable,
    StopReason,
    ToolCall,
    ToolChoice,
    ToolResult,
    ToolSpec,
    Turn,
    Usage,
)
from bots.llm.profiles import BUILTIN_PROFILES, ProfileError, ProviderProfile, create_provider, load_profiles
from bots.llm.scripted import ScriptedProvider, estimate_prompt_tokens, estimate_tokens

__all__ = (
    "ACTIONS",
    "BUILTIN_PROFILES",
    "DECIDE_TOOL",
    "Action",
    "ChatProvider",
    "Completion",
    "CompletionRequest",
    "Decision",
    "DecisionRequest",
    "DecisionResult",
    "LLMAuthError",
    "LLMBadOutput",
    "LLMBadRequest",
    "LLMError",
    "LLMRateLimited",
    "LLMTimeout",
    "LLMUnavailable",
    "ProfileError",
    "ProviderProfile",
    "ScriptedProvider",
    "StopReason",
    "ToolCall",
    "ToolChoice",
    "ToolResult",
    "ToolSpec",
    "Turn",
    "Usage",
    "create_provider",
    "estimate_prompt_tokens",
    "estimate_tokens",
    "load_profiles",
)
