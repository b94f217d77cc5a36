"""Where the evaluation studies keep their inputs and models in the lake: registered question
sets (``kg_platform.evaluation.common.question_sets``), reader and verifier configurations
and models, and the folders of trained ones (``kg_platform.evaluation``). Their reports are
in ``storage/reports.py``."""

QUESTIONS = "questions"
READER_CONFIGS = "readers/configs"
READER_MODELS = "readers/models"
READERS_TRAINED = "readers/trained"
VERIFIER_CONFIGS = "verifiers/configs"
VERIFIER_MODELS = "verifiers/models"
VERIFIERS_TRAINED = "verifiers/trained"
