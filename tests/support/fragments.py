"""What a Source sends a hub: its bearer tokens, Change List fragments, change times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rspush.resourcesync.w3cdt import format_w3c_datetime

TOKEN_A = "token-of-source-a"
TOKEN_B = "token-of-source-b"


def change_fragment(*changes: tuple[str, str, str], capability: str = "changelist") -> bytes:
    """A fragment of (loc, change, datetime) triples."""
    urls = "".join(
        f'<url><loc>{loc}</loc><rs:md change="{change}" datetime="{when}"'
        f' length="{len(loc)}" type="text/plain"/></url>'
        for loc, change, when in changes
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
        'xmlns:rs="http://www.openarchives.org/rs/terms/">'
        f'<rs:md capability="{capability}"/>{urls}</urlset>'
    ).encode()


def auth(token: str = TOKEN_A) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/xml"}


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Times:
    """Strictly increasing change times, an hour in the past (within the hub's tolerance),
    ``step`` apart unless a call asks for another step."""

    def __init__(self, step: timedelta = timedelta(milliseconds=1)) -> None:
        self.now = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
        self.step = step

    def next(self, step: timedelta | None = None) -> str:
        self.now += self.step if step is None else step
        return format_w3c_datetime(self.now)
