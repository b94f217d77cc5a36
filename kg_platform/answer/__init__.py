# the evidence rankers `kg ask --ranker` offers (AskConfig.ranker): here, so that parsing a
# command line imports none of the question path
RANKERS = ("auto", "dense", "structural")
