"""The Transformer: attention, masks, linear layers, dropout, the loss, and its checkpoint format."""
