"""Server configs: a server declared as data (name, model, verbatim launch flags, env, GPUs)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ServerConfig(BaseModel):
    """One server to launch (or the simulator to launch in its place).

    ``args`` go to ``python -m sglang.launch_server`` verbatim, because SGLang's flags drift
    between releases; the plugin adds only ``--model-path``, ``--host`` and ``--port``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=64)
    model: str = Field(min_length=1)
    args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    gpus: int = Field(default=1, ge=0)
    launch_timeout_s: float = Field(default=600.0, gt=0)
    # Which simulator profile stands in for this server when no GPU/SGLang is available.
    sim_profile: str | None = None
