"""The LiteRT row (``litert``): ai-edge-litert's Interpreter on rtmatrix's own .tflite export."""
