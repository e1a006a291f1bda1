// reveal.js settings for the example deck (a file of its own: the pages run no inline script)
Reveal.initialize({ hash: true, width: 1280, height: 820, margin: 0.02, controls: true, progress: true });
