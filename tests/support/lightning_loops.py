"""The Lightning loops the integration tests train: a tiny MLP module and a random-data loader."""

from __future__ import annotations

import time

BATCH = 4


def random_loader(torch, n: int, item_sleep_s: float = 0.0, batch: int = BATCH):
    """A DataLoader of `n` random samples (32 features, 4 classes), `item_sleep_s` per sample."""

    class RandomData(torch.utils.data.Dataset):
        def __init__(self) -> None:
            g = torch.Generator().manual_seed(0)
            self.x = torch.randn(n, 32, generator=g)
            self.y = torch.randint(0, 4, (n,), generator=g)

        def __len__(self) -> int:
            return n

        def __getitem__(self, i):
            if item_sleep_s:
                time.sleep(item_sleep_s)  # a slow input pipeline
            return self.x[i], self.y[i]

    return torch.utils.data.DataLoader(RandomData(), batch_size=batch)


def lightning_mlp(L, torch, sleep_s: float = 0.0):
    """A LightningModule MLP whose validation epoch end and checkpoint save each sleep `sleep_s`."""

    class MLP(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
            self.validations = 0

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def validation_step(self, batch, batch_idx):
            x, y = batch
            self.log("val_loss", torch.nn.functional.cross_entropy(self.net(x), y))

        def on_validation_epoch_end(self):
            self.validations += 1
            time.sleep(sleep_s)  # inside the validation loop

        def on_save_checkpoint(self, checkpoint):
            time.sleep(sleep_s)  # inside Trainer.save_checkpoint

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    return MLP()
