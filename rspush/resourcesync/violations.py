"""What the validator reports: one value per broken rule, with where and which section."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict


class Severity(StrEnum):
    """``error``: the spec's MUST is broken; ``warning``: a SHOULD, or a MUST the spec's own
    examples break (see docs/validation.md)."""

    ERROR = "error"
    WARNING = "warning"


class Violation(BaseModel):
    """One broken rule.

    ``entry`` is the 0-based index of the ``<url>``/``<sitemap>`` child it concerns (None for
    the document itself); ``line`` the source line when the document was parsed from bytes.
    """

    model_config = ConfigDict(frozen=True)

    rule: str
    message: str
    section: str
    severity: Severity = Severity.ERROR
    entry: int | None = None
    line: int | None = None

    def __str__(self) -> str:
        where = "document" if self.entry is None else f"entry {self.entry}"
        if self.line is not None:
            where += f" (line {self.line})"
        return f"{self.severity}: {where}: [{self.rule}, {self.section}] {self.message}"
