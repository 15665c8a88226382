"""Qwen2-VL and Qwen2.5-VL: flattened patches with ``image_grid_thw`` and M-RoPE (3-D) positions."""

from __future__ import annotations

import numpy as np

from laya_robustness.scoring.adapters.default import Adapter


class Qwen2VLAdapter(Adapter):
    """Prompt positions from the model's own ``get_rope_index`` (temporal, height, width per image token)."""

    name = "qwen2_vl"
    model_types = ("qwen2_vl", "qwen2_5_vl")
    layout_inputs = ("image_grid_thw",)

    def prompt_positions(self, ids, groups):
        import torch

        grids = [g["image_grid_thw"] for g in groups]
        input_ids = torch.tensor([ids], dtype=torch.long)
        types = (input_ids == self.image_token_id).int()
        grid = torch.cat(grids, dim=0) if grids else None
        positions, _ = self.base_model.get_rope_index(input_ids, mm_token_type_ids=types, image_grid_thw=grid)
        return positions[:, 0, :].cpu().numpy().astype(np.int64)
