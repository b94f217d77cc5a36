import dagster as dg

from kg_platform.storage.lake import Lake


class LakeResource(dg.ConfigurableResource):
    """The data lake root: a local folder (default `.kg/lake`) or `s3://bucket/prefix`.
    S3 endpoint and credentials come from the environment (AWS_ENDPOINT_URL, AWS_*)."""

    root: str = ".kg/lake"

    def get(self) -> Lake:
        return Lake(self.root)
