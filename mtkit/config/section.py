"""What every config section is: a pydantic model that refuses unknown keys and cannot change once read."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
