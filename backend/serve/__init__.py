"""A local OpenAI-compatible server over one converted package (`mmforge serve`).

- `protocol`: the API's request and answer shapes (what is read, what is written, errors);
- `constrain`: `response_format` and `tools` as the runtime's constrained decoding, and
  tool calls read back from an answer;
- `intake`: a request's pictures and clips as bounded files for the chat intake (and the
  `--allow-fetch` fetcher, public addresses only);
- `engine`: one loaded `ChatSession`, one generation at a time, a fair bounded queue;
- `app`: the HTTP routes (Starlette);
- `guard`: the Host and Origin checks that keep web pages out, and CORS for allowed ones;
- `connections`: uvicorn's h11 protocol with a header deadline and a connection limit;
- `server`: the ASGI server (uvicorn) started and stopped cleanly.

Importing this package imports nothing heavy (the command line reads its defaults). The
GUI never imports the server: it runs `mmforge serve … --events` as a child process and
reads its events, as it does with every other worker.
"""

LOOPBACK = "127.0.0.1"
DEFAULT_PORT = 8340
