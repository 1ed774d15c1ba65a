"""The Transformer: attention, masks, linear layers, dropout, the loss, and its checkpoint format.

Shape comments here and in pipeline/decoding use one set of letters, declared in docs/shapes.md:
B batch, S source length, T target length, L a whole sequence, Lq/Lk attention's query/key lengths,
D model width, H heads, V vocabulary, K beam size, R = B x K decoding rows.
"""
