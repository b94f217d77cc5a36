import dagster as dg

from kg_platform.pubmed.source import PubmedSource


class PubmedSourceResource(dg.ConfigurableResource):
    """Where PubMed files come from: NLM's base URL (with `baseline/` and `updatefiles/`)
    or a local folder in the same layout."""

    base: str = "https://ftp.ncbi.nlm.nih.gov/pubmed/"
    max_connections: int = 4

    def get(self) -> PubmedSource:
        return PubmedSource(self.base, max_connections=self.max_connections)
