"""The bundled default model pair's recipe: corpus, tokenizer, training, export into the package,
held-out evaluation and the model card. specdec.zoo only loads what these produced."""
