"""simia's training side: exports of logged episodes, SFT and GRPO."""
