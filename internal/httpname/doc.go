// Package httpname validates HTTP header field names for the packages of
// shedkit that take one from their configuration or a recording.
package httpname
