"""ferry.GpuSubscriber, ferry.GpuPublisher and Sample.cuda where they cannot work: without the GPU module or
without a CUDA device. The device paths themselves are tests/gpu/python_torch_test.py (ctest
python_torch_gpu) and tests/gpu/python_gpu_pub_test.py (ctest python_gpu_pub)."""

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


def test_gpu_publisher_without_a_device(node):
    pub = node.publisher("/gpu/none/pub", "tensor")
    if ferry.HAVE_GPU and ferry.gpu_device_count() > 0:
        pytest.skip("a CUDA device is there: python_gpu_pub covers it")
    expected = ferry.NoDeviceError if ferry.HAVE_GPU else ferry.NotSupportedError
    with pytest.raises(expected):
        ferry.GpuPublisher(pub)
    with pytest.raises(expected):
        ferry.GpuPublisher(pub, device=0, ipc="vmm", early_wake=False)
    if ferry.HAVE_GPU:
        with pytest.raises(ferry.InvalidArgumentError):
            ferry.GpuPublisher(pub, ipc="shm")
    # The failed GpuPublisher left the publisher free and the node closable.
    loan = pub.loan_tensor((2, 3), "float32")
    pub.publish(loan)
    with pytest.raises(TypeError if ferry.HAVE_GPU else ferry.NotSupportedError):
        ferry.GpuPublisher("not a publisher")
    pub.close()


def test_sample_cuda_without_a_device(node):
    pub = node.publisher("/gpu/none/host", "image")
    sub = node.subscribe("/gpu/none/host", "image")
    pub.wait_subscribers(1, timeout=10)
    if ferry.HAVE_GPU and ferry.gpu_device_count() > 0:
        pytest.skip("a CUDA device is there: python_host_gpu covers it")
    loan = pub.loan_image(4, 2, "mono8")
    pub.publish(loan)
    sample = sub.take(timeout=10)
    expected = ferry.NoDeviceError if ferry.HAVE_GPU else ferry.NotSupportedError
    with pytest.raises(expected):
        sample.cuda()
    with pytest.raises(expected if not ferry.HAVE_GPU else ValueError):
        sample.cuda(device=-1)
    # The failed view left the sample held by its user alone: release gives it back.
    assert sub.stats()["held"] == 1
    sample.release()
    assert sub.stats()["held"] == 0
    with pytest.raises(expected if not ferry.HAVE_GPU else ferry.StateError):
        sample.cuda()
    pub.close()
    sub.close()
