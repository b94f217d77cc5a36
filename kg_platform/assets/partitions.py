import dagster as dg

# one key per NLM file, e.g. pubmed26n0001; added by `kg build` and by the update sensor
pubmed_files = dg.DynamicPartitionsDefinition(name="pubmed_files")
