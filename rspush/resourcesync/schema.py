"""Validation against the official XML Schemas (Sitemap 0.9, Sitemap index 0.9, ResourceSync
1.1), shipped in ``resourcesync/schemas``.

The Sitemap schema imports nothing, yet its ``xsd:any namespace="##other"`` slots are
``processContents="strict"``: the ResourceSync schema must be loaded beside it. A small driver
schema imports both namespaces, one driver per root (``urlset`` and ``sitemapindex`` share a
namespace but live in two schema files).

One deliberate exception: the 2008 Sitemap schemas require at least one ``<url>`` (and one
``<sitemap>``), while ResourceSync allows an empty ``<urlset>``/``<sitemapindex>`` ("zero or
more" children, Z39.99 §7: an open Change List with no changes yet, a Source with no
resources, an archive with nothing archived yet). An empty document is checked with one
placeholder entry added, so every other rule of the schema still applies to it.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from lxml import etree

from . import namespaces as ns

_DRIVER = """<xsd:schema xmlns:xsd="http://www.w3.org/2001/XMLSchema">
  <xsd:import namespace="{sitemap_ns}" schemaLocation="{sitemap}"/>
  <xsd:import namespace="{rs_ns}" schemaLocation="{rs}"/>
</xsd:schema>"""

_PLACEHOLDER_LOC = "http://placeholder.invalid/"


@cache
def _schema(root: str) -> etree.XMLSchema:
    folder = Path(__file__).parent / "schemas"
    sitemap_file = "sitemap-0.9.xsd" if root == "urlset" else "siteindex-0.9.xsd"
    driver = _DRIVER.format(
        sitemap_ns=ns.SITEMAP_NS,
        rs_ns=ns.RS_NS,
        sitemap=(folder / sitemap_file).as_uri(),
        rs=(folder / "resourcesync-1.1.xsd").as_uri(),
    )
    # The schemas are our own package files: reading them is the only file access here.
    parser = etree.XMLParser(resolve_entities=False, no_network=True)
    return etree.XMLSchema(etree.fromstring(driver.encode(), parser))


def schema_errors(data: bytes) -> list[str]:
    """Messages of every XSD violation in ``data`` (empty when valid).

    ``data`` must already have passed :func:`rspush.resourcesync.parser.parse_document`, which is
    what makes it safe to build a tree of here.
    """
    parser = etree.XMLParser(
        resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False
    )
    tree = etree.fromstring(data, parser)
    root = etree.QName(tree).localname
    if root not in ("urlset", "sitemapindex"):
        return [f"root <{root}> is not a Sitemap"]
    entry_tag = ns.URL if root == "urlset" else ns.SITEMAP
    if tree.find(entry_tag) is None:
        placeholder = etree.SubElement(tree, entry_tag)
        etree.SubElement(placeholder, ns.LOC).text = _PLACEHOLDER_LOC
    schema = _schema(root)
    if schema.validate(tree):
        return []
    log: Any = schema.error_log  # lxml-stubs do not declare _ErrorLog iterable
    errors: list[Any] = list(log)
    return [f"line {error.line}: {error.message}" for error in errors]
