"""`python -m manaka.train --device auto` picks the GPU only when a model can train there
(backend, device and cuBLAS), and otherwise trains on the CPU after one line saying why."""
import pytest

import manaka as mk
from manaka import cuda, train

TINY = ["--no-save", "--steps", "2", "--synthetic", "3000", "--eval-positions", "0", "--no-progress", "--preset", "small",
        "--producers", "1", "--prefetch", "2"]


def test_why_cannot_train_is_empty_exactly_when_cuda_training_works():
    reason = cuda.why_cannot_train()
    if cuda.is_available():
        try:
            cuda.backend_table()
            works = True
        except RuntimeError:
            works = False
        assert (reason == "") == works
    else:
        assert reason == cuda.why_unavailable() != ""


def test_a_device_without_cublas_is_refused_with_the_loader_message(monkeypatch):
    monkeypatch.setattr(cuda, "why_unavailable", lambda: "")  # a device is present...

    def no_cublas():
        raise RuntimeError("Model(device='cuda'): cuBLAS not found (tried libcublas.so.13)")

    monkeypatch.setattr(cuda, "backend_table", no_cublas)  # ...but cuBLAS is not
    assert "cuBLAS not found" in cuda.why_cannot_train()


def test_auto_falls_back_to_the_cpu_with_one_line_saying_why(monkeypatch, capsys):
    monkeypatch.setattr(cuda, "why_cannot_train", lambda: "cuBLAS not found (tried libcublas.so.13)")
    assert train.choose_device("auto") == "cpu"
    out = capsys.readouterr().out.splitlines()
    assert out == ["device: cpu (--device auto: the GPU cannot train here: cuBLAS not found (tried libcublas.so.13))"]


def test_auto_chooses_cuda_when_it_can_train(monkeypatch, capsys):
    monkeypatch.setattr(cuda, "why_cannot_train", lambda: "")
    assert train.choose_device("auto") == "cuda"
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("requested", ["cpu", "cuda"])
def test_an_explicit_device_is_kept(monkeypatch, requested):
    monkeypatch.setattr(cuda, "why_cannot_train", lambda: pytest.fail("not consulted for an explicit device"))
    assert train.choose_device(requested) == requested


def test_training_run_with_auto_falls_back_and_trains(monkeypatch, capsys):
    monkeypatch.setattr(cuda, "why_cannot_train", lambda: "no CUDA device/driver: stand-in for this test")
    assert train.main(["--device", "auto", *TINY]) == 0
    out = capsys.readouterr().out
    assert "device: cpu (--device auto: the GPU cannot train here: no CUDA device/driver" in out
    assert "model: cpu," in out and "done: step 2" in out
