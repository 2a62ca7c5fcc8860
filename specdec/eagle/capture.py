"""Feature capture for EAGLE-3 heads: ``core.capture`` (it lives in core so that prefill and
plain steps, below the drafters, capture for any drafter that declares outputs).
Tests: tests/eagle/test_capture.py."""

from ..core.capture import CapturedFeatures, capture_layers, decoder_layers, read_forward

__all__ = ["CapturedFeatures", "capture_layers", "decoder_layers", "read_forward"]
