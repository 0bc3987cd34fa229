"""Shared helpers for the render_cache tests."""

from __future__ import annotations

from pipeline.stages.config import typed
from pipeline.stages.render_cache.config import RenderCacheConfig


def config(**overrides: object) -> RenderCacheConfig:
    return typed(RenderCacheConfig, {"hires": [], **overrides}, "stages.render_cache")
