#!/usr/bin/env bash
# chat_tmux_test.sh TANDEM MODEL: drives `tandem chat` in a real terminal (tmux) like a person:
# two questions, Ctrl-C during a long reply, then /exit. Fails if the screen does not show the
# prompts and replies, or if the program is still running at the end.
set -euo pipefail
tandem=$1 model=$2
if [[ ! -f "$model" ]]; then
  echo "SKIP: model $model not found (shared test material missing)"
  exit 0
fi
session="tandem-chat-test-$$"
cleanup() { tmux kill-session -t "$session" 2>/dev/null || true; }
trap cleanup EXIT
tmux new-session -d -s "$session" -x 200 -y 50 \
  "$tandem chat -m $model --temp 0 -n 200; echo CHAT-EXITED-\$?; sleep 30"
wait_for() {  # wait_for TEXT: until the screen shows TEXT, at most 20 s
  for _ in $(seq 200); do
    tmux capture-pane -p -t "$session" | grep -qF -- "$1" && return 0
    sleep 0.1
  done
  echo "FAIL: screen never showed '$1'; it shows:"; tmux capture-pane -p -t "$session"; exit 1
}
wait_for "chat template: chatml"
tmux send-keys -t "$session" "Hello, who are you?" Enter
wait_for "Hello, who are you?"
sleep 1
wait_for_prompts() {  # wait_for_prompts N: until N prompt lines are on screen, at most 20 s
  for _ in $(seq 200); do
    (( $(tmux capture-pane -p -t "$session" | grep -c '^>' || true) >= $1 )) && return 0
    sleep 0.1
  done
  echo "FAIL: fewer than $1 prompts on screen:"; tmux capture-pane -p -t "$session"; exit 1
}
wait_for_prompts 2  # the first reply (up to 200 tokens) is done
tmux send-keys -t "$session" C-c  # Ctrl-C at the prompt: a fresh prompt, the program goes on
wait_for_prompts 3
tmux send-keys -t "$session" "Tell me a story." Enter
wait_for "Tell me a story."
# Ctrl-C right after sending (during the reply, or at the prompt if the reply was quicker):
# a new prompt comes back and the program goes on.
before=$(tmux capture-pane -p -t "$session" | grep -c '^>' || true)
tmux send-keys -t "$session" C-c
wait_for_prompts $((before + 1))
if tmux capture-pane -p -t "$session" | grep -q CHAT-EXITED; then
  echo "FAIL: Ctrl-C ended the program instead of the reply"; tmux capture-pane -p -t "$session"; exit 1
fi
tmux send-keys -t "$session" "/exit" Enter
wait_for "CHAT-EXITED-0"
after=$(tmux capture-pane -p -t "$session" | grep -c '^>' || true)
if (( after < before + 1 )); then
  echo "FAIL: expected at least three prompts on screen, saw $after"; tmux capture-pane -p -t "$session"; exit 1
fi
echo "PASS: chat answered two messages, survived Ctrl-C and exited cleanly (prompts: $before -> $after)"
