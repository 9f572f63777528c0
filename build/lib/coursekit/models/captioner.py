"""Image captioning with attention over a grid (Xu et al. 2015, "Show, Attend and Tell").

A small CNN turns the image into a grid of feature vectors h_{ij}, one per cell; the decoder is
the one of Bahdanau attention, with the grid in place of the encoder's annotations:
e_{t,ij} = a(s_{t-1}, h_{ij}), α_t = softmax(e_t) over all cells, c_t = Σ_{ij} α_{t,ij} h_{ij}.
Each generated word thus comes with a map α_t over the image that says where the model looked.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from coursekit.attention import AdditiveAttention


class GridEncoder(nn.Module):
    """(B, 1, H, W) image -> (B, G·G, d_feat) features h_{ij}, cells in row-major order.

    Two convolutions, then a max-pool onto the G x G grid; a learned embedding of each cell's
    position is added, so the decoder can tell cells apart (to read them out in order), and a
    LayerNorm puts every cell's features on the same scale.
    """

    def __init__(self, grid: int = 3, d_feat: int = 64, channels: int = 32) -> None:
        super().__init__()
        self.cnn = nn.Sequential(
            nn.Conv2d(1, channels // 2, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(channels // 2, channels, kernel_size=3, padding=1), nn.ReLU(),
            nn.AdaptiveMaxPool2d(grid),  # one vector per cell
        )
        self.proj = nn.Linear(channels, d_feat)
        self.position = nn.Parameter(torch.randn(grid * grid, d_feat))  # N(0, 1), like nn.Embedding
        self.norm = nn.LayerNorm(d_feat)

    def forward(self, images: Tensor) -> Tensor:
        features = self.cnn(images).flatten(2).transpose(1, 2)  # (B, G·G, channels)
        return self.norm(self.proj(features) + self.position)


class AttentionCaptioner(nn.Module):
    """Grid encoder + LSTM decoder with additive attention over the grid cells.

    The initial state comes from the average of the grid features (s_0 = tanh(W_s mean_ij h_ij));
    at step t the decoder attends with s_{t-1}, feeds [y_{t-1}; c_t] to its LSTM cell and
    predicts the next word from the deep output g(s_t, c_t, y_{t-1}).
    """

    def __init__(self, vocab_size: int, grid: int = 3, d_feat: int = 64, d_emb: int = 32,
                 d_hidden: int = 64, d_attn: int = 64, pad_id: int = 0) -> None:
        super().__init__()
        self.encoder = GridEncoder(grid, d_feat)
        self.emb = nn.Embedding(vocab_size, d_emb, padding_idx=pad_id)
        self.init_state = nn.Linear(d_feat, d_hidden)  # W_s
        self.attention = AdditiveAttention(d_hidden, d_feat, d_attn)
        self.decoder = nn.LSTMCell(d_emb + d_feat, d_hidden)
        self.out = nn.Linear(d_hidden + d_feat + d_emb, vocab_size)

    def encode(self, images: Tensor) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """images: (B, 1, H, W) -> grid features h (B, G·G, d_feat) and the initial state."""
        h = self.encoder(images)
        s0 = torch.tanh(self.init_state(h.mean(dim=1)))
        return h, (s0, torch.zeros_like(s0))

    def step(
        self, y_prev: Tensor, state: tuple[Tensor, Tensor], h: Tensor
    ) -> tuple[Tensor, tuple[Tensor, Tensor], Tensor]:
        """One word. y_prev: (B,) ids -> logits (B, V), new state, weights α_t (B, G·G)."""
        y = self.emb(y_prev)
        c, alpha = self.attention(state[0], h)  # every cell may be attended: no mask
        state = self.decoder(torch.cat([y, c], dim=-1), state)
        return self.out(torch.cat([state[0], c, y], dim=-1)), state, alpha

    def forward(self, images: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher forcing. tgt_in: (B, T) starts with BOS -> logits (B, T, V)."""
        h, state = self.encode(images)
        logits = []
        for y_prev in tgt_in.unbind(dim=1):
            step_logits, state, _ = self.step(y_prev, state, h)
            logits.append(step_logits)
        return torch.stack(logits, dim=1)

    @torch.no_grad()
    def generate(self, images: Tensor, max_len: int, bos_id: int) -> tuple[Tensor, Tensor]:
        """Greedy captions -> word ids (B, max_len) and attention maps α (B, max_len, G·G)."""
        h, state = self.encode(images)
        token = torch.full((images.shape[0],), bos_id, dtype=torch.long, device=images.device)
        tokens, weights = [], []
        for _ in range(max_len):
            step_logits, state, alpha = self.step(token, state, h)
            token = step_logits.argmax(-1)
            tokens.append(token)
            weights.append(alpha)
        return torch.stack(tokens, dim=1), torch.stack(weights, dim=1)
