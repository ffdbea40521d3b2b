"""ferry.GpuSubscriber where it cannot work: without the GPU module or without a CUDA device.
The device path itself is tests/gpu/python_torch_test.py (ctest python_torch_gpu)."""

import pytest

import ferry


def test_gpu_subscriber_without_a_device(node):
    sub = node.subscribe("/gpu/none", "tensor")
    if ferry.HAVE_GPU and ferry.gpu_device_count() > 0:
        pytest.skip("a CUDA device is there: python_torch_gpu covers it")
    expected = ferry.NoDeviceError if ferry.HAVE_GPU else ferry.NotSupportedError
    with pytest.raises(expected):
        ferry.GpuSubscriber(sub)
    assert ferry.gpu_device_count() == 0
    # The failed GpuSubscriber left the subscriber free and the node closable.
    assert sub.try_take() is None
    with pytest.raises(TypeError if ferry.HAVE_GPU else ferry.NotSupportedError):
        ferry.GpuSubscriber("not a subscriber")
    sub.close()
