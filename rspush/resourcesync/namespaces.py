"""XML namespaces and the limits the Sitemap protocol imposes (Z39.99 §7)."""

from __future__ import annotations

from typing import Final

SITEMAP_NS: Final = "http://www.sitemaps.org/schemas/sitemap/0.9"
RS_NS: Final = "http://www.openarchives.org/rs/terms/"

# Clark-notation tags, computed once: the parser compares against them per element.
URLSET: Final = f"{{{SITEMAP_NS}}}urlset"
SITEMAPINDEX: Final = f"{{{SITEMAP_NS}}}sitemapindex"
URL: Final = f"{{{SITEMAP_NS}}}url"
SITEMAP: Final = f"{{{SITEMAP_NS}}}sitemap"
LOC: Final = f"{{{SITEMAP_NS}}}loc"
LASTMOD: Final = f"{{{SITEMAP_NS}}}lastmod"
CHANGEFREQ: Final = f"{{{SITEMAP_NS}}}changefreq"
PRIORITY: Final = f"{{{SITEMAP_NS}}}priority"
RS_MD: Final = f"{{{RS_NS}}}md"
RS_LN: Final = f"{{{RS_NS}}}ln"

# Z39.99 §7: "the limit is 50,000 items per document and a document size of 50 MB".
MAX_ENTRIES: Final = 50_000
MAX_DOCUMENT_BYTES: Final = 50 * 1024 * 1024
