// Preload for node servers under test: every listen() binds 127.0.0.1 only (server-everything's
// HTTP modes call app.listen(PORT) without a host, which would bind every interface), and the
// port it got is written to stderr as "FRUGAL_LISTENING <port>" so that PORT=0 is usable.
import net from "node:net";

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const callback = args.find((arg) => typeof arg === "function");
  const first = args[0];
  const options =
    typeof first === "object" && first !== null
      ? { ...first, host: "127.0.0.1" }
      : { port: Number(first ?? 0), host: "127.0.0.1" };
  this.once("listening", () => {
    const address = this.address();
    if (address && typeof address === "object") {
      process.stderr.write(`FRUGAL_LISTENING ${address.port}\n`);
    }
  });
  return callback ? listen.call(this, options, callback) : listen.call(this, options);
};
