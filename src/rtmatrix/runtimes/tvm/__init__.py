"""Apache TVM (the MLC-LLM way of building a model library): the Relax VM adapter
(``adapter.py``). The compiler side (building the library) is a fixture exporter, in
``rtmatrix.fixtures``."""
