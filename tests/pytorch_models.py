"""PyTorch models written in Python, as a user of --model-file writes them, and
the evaluation of a trained model in Python (tests/model_file_test.cc).

  pytorch_models.py script cnn|resnet18 OUT.pt [--init STATE_DICT.pt]
      torch.jit.script()s the model (initialised from a state dict if given)
      and saves it to OUT.pt.
  pytorch_models.py evaluate MODEL.pt|STATE_DICT.pt CIFAR_DIR [--arch resnet18] [--samples N]
      prints "accuracy X" (percent) of the model on CIFAR_DIR/test_batch.bin,
      normalised as the trainer does. A state dict is loaded (strictly) into
      --arch; a TorchScript file is run as it is.
"""
import argparse
import json

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# CIFAR-10's normalisation (trainer/data/cifar10.cc).
CIFAR_MEAN = [0.4914, 0.4822, 0.4465]
CIFAR_STD = [0.2470, 0.2435, 0.2616]


class SmallCnn(nn.Module):
    """The kind of network the Horovod-in-Docker tutorial trains."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(64)
        self.dropout = nn.Dropout(0.25)
        self.fc = nn.Linear(64 * 8 * 8, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(self.dropout(torch.flatten(x, 1)))


# pytorch-cifar's models/resnet.py, as it is.
class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes, planes, stride=1):
        super(BasicBlock, self).__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != self.expansion * planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, self.expansion * planes, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(self.expansion * planes))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += self.shortcut(x)
        out = F.relu(out)
        return out


class ResNet(nn.Module):
    def __init__(self, block, num_blocks, num_classes=10):
        super(ResNet, self).__init__()
        self.in_planes = 64
        self.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.layer1 = self._make_layer(block, 64, num_blocks[0], stride=1)
        self.layer2 = self._make_layer(block, 128, num_blocks[1], stride=2)
        self.layer3 = self._make_layer(block, 256, num_blocks[2], stride=2)
        self.layer4 = self._make_layer(block, 512, num_blocks[3], stride=2)
        self.linear = nn.Linear(512 * block.expansion, num_classes)

    def _make_layer(self, block, planes, num_blocks, stride):
        strides = [stride] + [1] * (num_blocks - 1)
        layers = []
        for stride in strides:
            layers.append(block(self.in_planes, planes, stride))
            self.in_planes = planes * block.expansion
        return nn.Sequential(*layers)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer1(out)
        out = self.layer2(out)
        out = self.layer3(out)
        out = self.layer4(out)
        out = F.avg_pool2d(out, 4)
        out = out.view(out.size(0), -1)
        out = self.linear(out)
        return out


def ResNet18():
    return ResNet(BasicBlock, [2, 2, 2, 2])


ARCHS = {"cnn": SmallCnn, "resnet18": ResNet18}


def cifar_test(cifar_dir, samples):
    raw = np.fromfile(cifar_dir + "/test_batch.bin", dtype=np.uint8).reshape(-1, 3073)
    if samples:
        raw = raw[:samples]
    labels = torch.from_numpy(raw[:, 0].astype(np.int64))
    x = torch.from_numpy(raw[:, 1:].reshape(-1, 3, 32, 32).astype(np.float32) / 255)
    mean = torch.tensor(CIFAR_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(CIFAR_STD).view(1, 3, 1, 1)
    return (x - mean) / std, labels


def load(path, arch):
    try:
        files = {"preprocessing.json": ""}
        model = torch.jit.load(path, _extra_files=files)
        if files["preprocessing.json"]:
            json.loads(files["preprocessing.json"])  # written by the trainer, must parse
        return model
    except RuntimeError:
        model = ARCHS[arch]()
        model.load_state_dict(torch.load(path), strict=True)
        return model


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("script")
    s.add_argument("arch", choices=sorted(ARCHS))
    s.add_argument("out")
    s.add_argument("--init")
    s.add_argument("--seed", type=int, default=0)
    e = sub.add_parser("evaluate")
    e.add_argument("model")
    e.add_argument("cifar_dir")
    e.add_argument("--arch", default="resnet18", choices=sorted(ARCHS))
    e.add_argument("--samples", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(2)
    if args.command == "script":
        torch.manual_seed(args.seed)
        model = ARCHS[args.arch]()
        if args.init:
            model.load_state_dict(torch.load(args.init), strict=True)
        torch.jit.script(model).save(args.out)
        return
    model = load(args.model, args.arch).eval()
    x, labels = cifar_test(args.cifar_dir, args.samples)
    correct = 0
    with torch.no_grad():
        for i in range(0, len(labels), 256):
            correct += (model(x[i:i + 256]).argmax(1) == labels[i:i + 256]).sum().item()
    print("accuracy %.2f" % (100.0 * correct / len(labels)))


if __name__ == "__main__":
    main()
