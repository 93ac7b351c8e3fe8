"""Other toolkits' formats: CTranslate2 export and Hugging Face Marian (OPUS-MT) import and export."""
