"""Other toolkits' formats: transformers' Marian and Pegasus models in and out, CTranslate2."""
