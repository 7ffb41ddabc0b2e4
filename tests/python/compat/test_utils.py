"""Port of upstream Bagua's ``tests/torch_api/test_utils.py``, plus our own cases for the other
helpers of ``bagua.torch_api.utils``.

Mechanical edit: the ``tests`` import replaced by the harness's.
"""

import unittest
import time
import numpy as np
import torch
from bagua.torch_api.utils import StatisticalAverage
from bagua.torch_api.utils import (
    apply_flattened_call, apply_flattened_call_all, average_by_removing_extreme_values,
    check_contiguous, flatten, get_flattened_tensor, to_bagua_datatype, unflatten)
from harness import skip_if_cuda_available


class TestUtils(unittest.TestCase):
    @skip_if_cuda_available()
    def test_statistical_average(self):
        m = StatisticalAverage(
            last_update_time=time.time(),
            records=[5.0, 4.5005175, 3.5034241850204078],
            record_tail=(2.0166309999999985, 2.499061185570463),
        )
        time.sleep(1)

        m.record(6.0)

        test_answer_list = [
            (1.0, 6.0),
            (2.0, (6.0 + 5.0) / 2.0),
            (3.0, (6.0 + 4.5005175 * 2.0) / 3.0),
            (5.0, (6.0 + 3.5034241850204078 * 4.0) / 5.0),
            (7.0, (6.0 + 2.499061185570463 * (4.0 + 2.0166309999999985)) / 7.0),
        ]
        test_val_list = []
        for (last_n_seconds, _) in test_answer_list:
            test_val_list.append(m.get_records_mean(last_n_seconds))

        for a, (n, b) in zip(test_val_list, test_answer_list):
            self.assertTrue(
                np.isclose(a, b, atol=0.1),
                "last_n_seconds={}, test_val={}, answer={}, m={}".format(n, a, b, m),
            )

        self.assertTrue(
            np.isclose(
                m.total_recording_time(),
                4.0 + 2.0166309999999985 + 1,
                atol=0.1,
            ),
            "total_recording_time={}".format(m.total_recording_time()),
        )


class TestUtilsHelpers(unittest.TestCase):
    """Our own cases."""

    def test_flatten_unflatten(self):
        tensors = [torch.randn(2, 3), torch.randn(4), torch.randn(1, 1, 2)]
        flat = flatten(tensors)
        self.assertEqual(flat.shape, (12,))
        for a, b in zip(tensors, unflatten(flat, tensors)):
            self.assertTrue(torch.equal(a, b))
        self.assertTrue(torch.equal(get_flattened_tensor(tensors), flat))
        self.assertIsNone(get_flattened_tensor([]))

    def test_check_contiguous(self):
        storage = torch.zeros(10)
        self.assertTrue(check_contiguous([storage[0:3], storage[3:7], storage[7:]]))
        self.assertFalse(check_contiguous([storage[0:3], storage[4:7]]))
        self.assertFalse(check_contiguous([torch.zeros(2), torch.zeros(2)]))
        self.assertTrue(check_contiguous([]))

    def test_to_bagua_datatype(self):
        self.assertEqual(to_bagua_datatype(torch.float32), "f32")
        self.assertEqual(to_bagua_datatype(torch.float16), "f16")
        self.assertEqual(to_bagua_datatype(torch.uint8), "u8")
        self.assertEqual(to_bagua_datatype(torch.long), "i64")
        with self.assertRaisesRegex(ValueError, "unsupported data type torch.complex64; "
                                                "accepted: float32"):
            to_bagua_datatype(torch.complex64)

    def test_apply_flattened_call(self):
        tensors = [torch.ones(2), torch.ones(3, dtype=torch.float64), torch.ones(1)]

        def double(t):
            t.mul_(2)

        apply_flattened_call_all(tensors, double)
        for t in tensors:
            self.assertTrue(torch.equal(t, torch.full_like(t, 2)))
        apply_flattened_call(tensors[:1], lambda t, k: t.add_(k), extra_args=(5,))
        self.assertTrue(torch.equal(tensors[0], torch.full((2,), 7.0)))

    def test_average_by_removing_extreme_values(self):
        # Warm-up values (the first third) and the outlier 50 are left out.
        raw = [100.0, 90.0, 80.0, 10.0, 11.0, 9.0, 10.0, 50.0, 10.0]
        mean, std, kept = average_by_removing_extreme_values(raw)
        self.assertEqual(kept, [10.0, 11.0, 9.0, 10.0, 10.0])
        self.assertAlmostEqual(mean, 10.0)
        self.assertAlmostEqual(std, np.std(kept))

    def test_statistical_average_defaults_are_per_instance(self):
        a, b = StatisticalAverage(), StatisticalAverage()
        a.record(1.0)
        self.assertEqual(b.records, [])
        self.assertLessEqual(abs(b.last_update_time - time.time()), 5.0)
        self.assertEqual(a.get(0.5), 1.0)
        # Before any power-of-two record, get() answers the tail's average.
        c = StatisticalAverage(records=[], record_tail=(3.0, 4.5))
        self.assertEqual(c.get(0.0), 4.5)


if __name__ == "__main__":
    unittest.main()
